"""What a page says: its text decoded as a browser would, its head facts, its main text and
language, its near-duplicate fingerprint, and the fields a user asks for ([content],
[extract])."""
