"""Stages of the call pipeline (see proxy.pipeline for their order and contract)."""
