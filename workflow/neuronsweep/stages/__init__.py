"""The pipeline's stages, one module each: plan, build, capture, view, extract, aggregate, report."""
