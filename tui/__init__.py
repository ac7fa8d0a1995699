"""ranktop TUI: receive, aggregate, render. Never imports torch."""
