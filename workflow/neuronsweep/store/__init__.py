"""What a run keeps on disk between stages: stage records, failure records, the compile cache."""
