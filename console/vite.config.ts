import vue from "@vitejs/plugin-vue";
import { defineConfig } from "vitest/config";

// The admin serves the build from the Python package; hashed assets under /assets/.
const outDir = "../src/jobring/admin/console/dist"; // relative to this folder (the Vite root)

export default defineConfig({
  plugins: [vue()],
  base: "/",
  build: {
    outDir,
    emptyOutDir: true,
    assetsDir: "assets",
    target: "es2022",
    // No inline data: script or style; everything is a file under 'self'.
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 1000,
  },
  server: {
    proxy: { "/api/v1": "http://127.0.0.1:8080" },
  },
  test: {
    include: ["tests/**/*.test.ts"],
    environment: "node", // the component tests (tests/views) ask for happy-dom in their first line
    clearMocks: true,
  },
});
