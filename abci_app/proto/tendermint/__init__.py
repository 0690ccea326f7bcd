"""Generated protobuf modules (see trolly.abci_app.proto.regenerate)."""
