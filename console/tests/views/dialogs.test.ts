// @vitest-environment happy-dom
// Dialog focus: the first field (not "×") on open, back to the opener on close.
import { mount } from "@vue/test-utils";
import { describe, expect, it } from "vitest";
import { defineComponent, h } from "vue";
import ConfirmDialog from "../../src/components/ConfirmDialog.vue";
import ModalDialog from "../../src/components/ModalDialog.vue";

describe("ModalDialog", () => {
  it("focuses its first field, and gives the focus back to its opener when it closes", async () => {
    const opener = document.createElement("button");
    document.body.appendChild(opener);
    opener.focus();
    const form = defineComponent({
      render: () => h(ModalDialog, { title: "Edit" }, { default: () => [h("input", { name: "first" }), h("input", { name: "second" })] }),
    });
    const wrapper = mount(form, { attachTo: document.body });
    expect(document.activeElement).toBe(wrapper.find("input[name=first]").element);
    wrapper.unmount();
    expect(document.activeElement).toBe(opener);
    opener.remove();
  });

  it("focuses Cancel in a confirmation (no field)", () => {
    const wrapper = mount(ConfirmDialog, { props: { text: "Delete?", danger: true }, attachTo: document.body });
    expect((document.activeElement as HTMLElement).textContent?.trim()).toBe("Cancel");
    wrapper.unmount();
  });
});
