//! The C ABI (see `include/wool.h` and shared/design/C-API.md). Being written.
