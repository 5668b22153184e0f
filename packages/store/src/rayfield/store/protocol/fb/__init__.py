"""Generated flatbuffers classes; do not edit."""
