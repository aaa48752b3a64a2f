"""The model zoos parity trains: Hugging Face, timm and diffusers, and their fixes."""
