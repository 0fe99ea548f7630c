"""Parsers for the command outputs the GPU validation suite and `diagnose` read.

One module per tool, each raising its own `ParseError(ValueError)` on text it does not recognise:
- `nvidia_smi`: `--query-*` CSV, the default table, `-q`, `topo -m`, and every failure text;
- `dcgmi`: `dcgmi diag` tables and `-j` JSON (DCGM 2.x to 4.x), `discovery -l`, `health -c`,
  and dcgmi's error texts;
- `nccl_tests`: the *_perf benchmarks' tables (every layout since 2.0) and NCCL_DEBUG logs;
- `fi_info`: libfabric provider listings, noise-tolerant and per host;
- `efa_installer`: the EFA installer's console output and its installed-packages record;
- `kernel_log`: NVRM Xid and fallen-off-the-bus events in dmesg, journalctl, syslog and kmsg.

The real outputs each was tested on, and where they came from: tests/fixtures/outputs/ (one
folder per tool, each with a SOURCES.md).
"""
