# Writes OUT (a header defining SCALETRAIN_VERSION) from `git describe` of SRC,
# rewriting it only when the version changed, so that a build after a commit
# or an edit knows its own version. Run at every build (src/CMakeLists.txt).
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --tags
                OUTPUT_VARIABLE version OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0 OR version STREQUAL "")
  set(version "unknown")
endif()
set(text "#define SCALETRAIN_VERSION \"${version}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE "${OUT}" "${text}")
endif()
