# Writes the SHA-256 of INPUT as the C string NAME into OUTPUT: the CPU
# backend keys its kernel cache on the splitter's own code, so a changed
# splitter never reuses objects the old one generated.
file(SHA256 ${INPUT} hash)
file(WRITE ${OUTPUT} "// Generated from ${INPUT} by cmake/source_hash.cmake.\n"
  "const char ${NAME}[] __attribute__((visibility(\"hidden\"))) = \"${hash}\";\n")
