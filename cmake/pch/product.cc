// The translation unit that compiles cmake/pch/product.h into the precompiled header product
// targets reuse; it has no code of its own.
