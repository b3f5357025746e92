"""Wire protocols shared by several designs, sans-IO (bytes in, bytes out): ``http``."""
