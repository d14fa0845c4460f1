"""metrics.json's values, one typed part per concern (docs/metrics.md): each part is a dataclass whose
fields are its keys, in the file's order, built by one function from the records and the parts before
it, with a reason in its `notes` for each value it leaves null. stages/extract.py reads the files and
writes metrics.json; `compose` here joins the parts."""
