"""Speed and size studies (latency, build, load, scale, memory): ``python -m benchmarks.speed.NAME``."""
