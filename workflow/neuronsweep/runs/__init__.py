"""What works across a run or runs: progress (status) and comparing two runs."""
