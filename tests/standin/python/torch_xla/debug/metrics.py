"""torch_xla.debug.metrics double: metric_data(name) -> (count, total_ns, samples) or None."""

_data: dict = {}


def record(name, value_ns):
    count, total, samples = _data.get(name, (0, 0, []))
    _data[name] = (count + 1, total + value_ns, samples + [value_ns])


def metric_data(name):
    return _data.get(name)
