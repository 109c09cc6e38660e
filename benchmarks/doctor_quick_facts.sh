#!/bin/sh
# The facts `hostctl doctor --level quick` judges, gathered by hand the usual way: nvidia-smi
# (GPU list, power, PCIe, persistence, topology/P2P), lsblk (drives), findmnt (mounts and free
# space), swapon (swap areas and priorities). benchmarks/doctor_quick.py times it next to doctor.
# Missing tools are skipped (a plain machine has no nvidia-smi): their absence costs nothing.
have() { command -v "$1" >/dev/null 2>&1; }
if have nvidia-smi; then
    nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,persistence_mode,power.limit,power.default_limit,power.min_limit,power.max_limit,enforced.power.limit,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,memory.total --format=csv,noheader
    nvidia-smi topo -m
    nvidia-smi topo -p2p r
fi
lsblk -J -b -o NAME,PATH,SIZE,TYPE,FSTYPE,LABEL,PARTLABEL,UUID,MOUNTPOINTS,SERIAL,MODEL,ROTA
findmnt -J -b -o TARGET,SOURCE,FSTYPE,OPTIONS,SIZE,AVAIL
swapon --show --bytes --raw
exit 0
