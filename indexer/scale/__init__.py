"""Scale-out: embed huge collections into parquet shards (locally or on Ray), then build
a sharded FAISS index and a normal wherein index directory from them.

pyarrow (both engines) and ray (the Ray engine) are imported inside functions:
they are the optional ``[scale]`` extra.
"""
