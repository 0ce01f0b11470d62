"""Readers of measured data: B-Caffe logs and all-reduce latency files (readers, not models)."""
