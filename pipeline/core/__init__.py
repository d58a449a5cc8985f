"""Infrastructure every stage uses: atomic IO, seeding, digests, the process pool, the leak scanner, errors and the work / release folder paths."""
