"""The wire between the coordinator and its workers: messages, framing, versions, values."""
