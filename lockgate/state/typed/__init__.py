"""Typed keyed state: declared types stored as Arrow columns, with an evolution
contract (docs/state_evolution.md) and a layout that restores without running code."""
