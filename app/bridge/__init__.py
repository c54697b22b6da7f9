"""The Qt adapters of core: core's listener protocols as queued Qt signals, and the model thread behind them."""
