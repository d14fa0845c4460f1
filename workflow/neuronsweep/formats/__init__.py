"""Every reader and writer of a profile or trace (Chrome trace, pftrace, Neuron summaries, legacy json,
parquet, HLO dumps) and the SQL layer over them (profile_db)."""
