//! dLLM and AR decoding policies (filled in by the decoding work).
