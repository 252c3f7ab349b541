"""Serving: inference step costs and request-level simulation of multi-stage LLM serving
pipelines (RAG, KV-cache retrieval, reasoning, prefill, decode) on heterogeneous engines."""
