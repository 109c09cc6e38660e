"""Acting on the host: the only code that changes it. Each step compares the plan with fresh
facts and returns the Actions still needed (none when the host already matches), so a
re-run is a no-op, --dry-run prints exactly what would run, and every step verifies its
effect by reading the host again afterwards."""
