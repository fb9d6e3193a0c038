// stb_image_write's implementation, once, for the test-side writers (image_files.h); compiled
// without our warnings (stb's own code).
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
