"""The local web viewer (`nmem ui`): memory in a browser, for this machine's user only."""
