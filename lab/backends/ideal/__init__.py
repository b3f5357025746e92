"""`ideal`: an in-memory FIFO with reliable reads, the control row of every comparison."""
