"""Pure domain code: no I/O, no API clients, no clocks. Everything here is unit-testable."""
