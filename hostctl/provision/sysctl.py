"""Swap behaviour sysctls: the values for the profile's phase (swappiness 100 while converting
pushes cold pages to the NVMe swap early; ~10 while serving keeps the working set in RAM;
page-cluster 0 reads single pages from fast random-access drives), a file in /etc/sysctl.d so
they hold after a reboot, and the `sysctl -w` argv that applies them now."""

from __future__ import annotations

from hostctl.config import HostProfile

SYSCTL_FILE = "/etc/sysctl.d/90-hostctl-swap.conf"


def desired(profile: HostProfile) -> dict[str, int]:
    roles = profile.storage
    swappiness = roles.swappiness_converting if profile.phase == "converting" else roles.swappiness_serving
    return {"vm.swappiness": swappiness, "vm.page-cluster": roles.page_cluster}


def render(profile: HostProfile, values: dict[str, int]) -> str:
    lines = [
        "# Managed by `hostctl provision --only storage`; rewritten on every run.",
        f"# Swap behaviour for profile {profile.name}, phase {profile.phase} (storage.swappiness_{profile.phase},",
        "# storage.page_cluster).",
    ]
    lines += [f"{key} = {value}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def apply_argv(values: dict[str, int]) -> list[str]:
    return ["sysctl", "-w", *(f"{key}={value}" for key, value in values.items())]
