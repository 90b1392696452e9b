"""Run schedules: allocate, copy, launch; the Jit; DEBUG output."""
