"""Stages of the call pipeline (see proxy.pipeline.context for their order and contract)."""
