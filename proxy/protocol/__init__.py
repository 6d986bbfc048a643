"""Pure protocol code: bytes and messages in, messages and events out. No I/O imports."""
