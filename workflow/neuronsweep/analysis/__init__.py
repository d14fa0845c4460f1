"""Backend-independent analysis of profiles: interval arithmetic, (later) trace readers and SQL."""
