"""The trusted side of rhaipool: scheduling, region and provider runtimes, egress and the CLI."""

__version__ = "0.1.0"
