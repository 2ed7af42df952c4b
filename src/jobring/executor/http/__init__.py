"""The executor's HTTP side: the ASGI app (``app``), request bodies to protocol models
(``decode``), and the standalone HTTP/1.1 server on httptools (``protocol``, ``limits``)."""
