"""The data-plane and topic-admin APIs, one module per API (or per family: the three topic admin APIs),
composed for the request handlers by `coordinator_server.net.data_handlers.DataHandlers`."""
