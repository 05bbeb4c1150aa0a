"""Exports of replayed iterations for people: Chrome-trace JSON that ui.perfetto.dev opens."""
