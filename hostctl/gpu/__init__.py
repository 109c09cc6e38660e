"""GPU host checks: the P2P ladder and its functional all-reduce (p2p, harness, acs), PCIe and
driver health (health). Everything that needs PyTorch runs in a child process."""
