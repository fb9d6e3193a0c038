# cmake -DIN=FILE -DOUT=FILE.cc -DNAME=Function -P embed_asset.cmake: writes a C++ source whose
# tfd::launcher::Function() returns FILE's bytes as a std::string_view (a page tfctl serves).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hex_length)
if(hex_length EQUAL 0)
  message(FATAL_ERROR "${IN} is empty")
endif()
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by launcher/embed_asset.cmake; do not edit.\n#include <string_view>\n\n"
     "namespace tfd::launcher {\nnamespace {\nconst unsigned char kBytes[] = {\n${bytes}};\n}  // namespace\n\n"
     "std::string_view ${NAME}() { return {reinterpret_cast<const char*>(kBytes), sizeof kBytes}; }\n\n}  // namespace tfd::launcher\n")
file(RENAME "${OUT}.tmp" "${OUT}")
