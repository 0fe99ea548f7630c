"""Parsers for the command outputs the GPU validation suite reads.

One module per tool: `nccl_tests` (the *_perf benchmarks and NCCL_DEBUG=INFO logs), `nvidia_smi`
(`--query-gpu` CSV and its failure texts), `fi_info` (libfabric provider listings) and `dcgmi`
(`dcgmi diag` JSON and table output). Each raises its own `ParseError(ValueError)` on text it
does not recognise.
"""
