"""Drawing primitives the panes and screens share: colours, lazily drawn lines, sparklines and gauges."""
