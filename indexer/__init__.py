"""Build and maintain a wherein index: walk, decode, embed, catalog, vectors."""
