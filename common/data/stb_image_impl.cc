// stb_image and stb_image_resize, compiled here from Debian's headers (libstb-dev) as stb means
// them to be used: the implementation in one file of the program. Not Debian's libstb.so, because
// that one decodes every format stb knows (GIF, PSD, HDR, PIC, PNM, TGA, BMP): an image folder
// is PNG and JPEG, and a file named .png holding another format should be refused, not decoded by
// a parser nobody meant to expose. Compiled here, the decoder is also instrumented by the fuzz
// build (scripts/fuzz), so the fuzzer sees inside it. Built without our warnings (stb's own code).
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_NO_STDIO  // images.cc reads the files, bounded, and decodes from memory
#define STBI_NO_HDR
#define STBI_NO_LINEAR
#include <stb/stb_image.h>

#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb/stb_image_resize.h>
