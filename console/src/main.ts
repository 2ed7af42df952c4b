import { createApp } from "vue";
import App from "./App.vue";
import { locale } from "./i18n";
import { router } from "./router";
import "./styles.css";

document.documentElement.lang = locale.value;
createApp(App).use(router).mount("#app");
