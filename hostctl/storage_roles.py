"""The storage roles: the three cache directories a recipe can need, each on a drive or a
directory the profile names (config `storage.<role>`), planned in hostctl/plan/storage.py.
One tuple and one Literal, so config, plan and doctor cannot drift apart."""

from __future__ import annotations

from typing import Literal

Role = Literal["planes_cache", "expert_store", "compile_cache"]
ROLES: tuple[Role, ...] = ("planes_cache", "expert_store", "compile_cache")
# the roles the first conversion writes (and needs free space for)
CONVERSION_ROLES: tuple[Role, ...] = ("planes_cache", "expert_store")
