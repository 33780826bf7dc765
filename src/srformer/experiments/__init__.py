"""Experiments built on the library: the ACLSum main job and its plots."""
