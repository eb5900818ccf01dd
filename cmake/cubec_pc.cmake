# Writes cubec.pc and cubec-static.pc at install time (run by install(CODE)),
# when CMAKE_INSTALL_PREFIX is the prefix the install actually runs with:
# `cmake --install build --prefix X` gives prefix=X. Every other directory is
# written relative to ${prefix}, unless it was configured absolute.
# In: CUBE_PC_TEMPLATE_DIR, CUBE_PC_OUTPUT_DIR, CUBE_PC_LIBDIR,
#     CUBE_PC_INCLUDEDIR, CUBE_PC_VERSION.
set(CUBE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
foreach(dir CUBE_PC_LIBDIR CUBE_PC_INCLUDEDIR)
  if(NOT IS_ABSOLUTE "${${dir}}")
    set(${dir} "\${prefix}/${${dir}}")
  endif()
endforeach()
foreach(name cubec cubec-static)
  configure_file("${CUBE_PC_TEMPLATE_DIR}/${name}.pc.in" "${CUBE_PC_OUTPUT_DIR}/${name}.pc" @ONLY)
endforeach()
