"""What a design is, and nothing else: the Runtime port and its errors (``runtime``), the
Backend and client interface (``backend``), the promises a design declares (``promises``), its
options (``options``), the Store on a Runtime disk (``storage``), service-time models
(``service``), message bodies (``message``) and the sans-IO HTTP wire (``http``).

The lowest layer: it imports nothing else of the lab. Design authors import it through
``lab.design``."""
