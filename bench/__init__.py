"""Benchmarks: ratios measured side by side in one run, results written to bench/results/."""
