# Turns INPUT into a C array `cube_dialect_source` (NUL-terminated) in OUTPUT,
# its lines numbered as cube/dialect.h: a compiler message about a dialect
# macro names the header's line, not the line of the file it was pasted into.
string(HEX "#line 1 \"cube/dialect.h\"\n" line)
file(READ ${INPUT} content HEX)
string(PREPEND content "${line}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," content "${content}")
file(WRITE ${OUTPUT} "// Generated from include/cube/dialect.h by cmake/embed.cmake.\n"
  "const char cube_dialect_source[] __attribute__((visibility(\"hidden\"))) = {${content}0x00};\n")
