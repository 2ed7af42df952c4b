// Starts Swagger UI on the page served at /api/v1/docs (kept out of the HTML: the page's
// Content-Security-Policy allows scripts from the admin's own origin only).
window.addEventListener("load", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.getAttribute("data-openapi-url"),
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    // Sessions need the CSRF token on writes; tokens (Authorize, Bearer) do not.
    withCredentials: true
  });
});
