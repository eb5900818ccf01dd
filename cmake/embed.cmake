# Turns INPUT into a C array `cube_dialect_source` (NUL-terminated) in OUTPUT.
file(READ ${INPUT} content HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," content "${content}")
file(WRITE ${OUTPUT} "// Generated from include/cube/dialect.h by cmake/embed.cmake.\n"
  "const char cube_dialect_source[] __attribute__((visibility(\"hidden\"))) = {${content}0x00};\n")
