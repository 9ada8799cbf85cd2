// acp-trio's own Worker stand-in, for the site opened from disk (file://).
//
// Material's search runs in a Web Worker, and Chromium will not start a Worker from a file:// URL.
// On file:// only, window.Worker becomes FileWorker below, which runs the worker's script in a hidden
// iframe of the page; the iframe's window stands for the worker's global scope:
// - the page's worker.postMessage(data) is a "message" event on the iframe's window, which the
//   script hears through its onmessage or addEventListener("message", ...);
// - the script's postMessage(data) (or self.postMessage) is a "message" event on the FileWorker,
//   which the page hears through its onmessage or addEventListener("message", ...);
// - importScripts(...urls) loads the scripts one after the other and returns a promise: a script
//   element cannot load synchronously, and Material's worker awaits what importScripts returns;
// - an error thrown in the script, or a script that cannot be loaded, is an "error" event on the
//   FileWorker (Chromium tells a page on file:// no more of a script's error than "Script error.").
// As between a page and a Worker, a message is a copy (structuredClone) delivered later, never at once,
// and messages posted before the script has run wait for it, in order.  Classic scripts only: the
// site starts no module worker.  Its name holds "iframe-worker": listed in mkdocs.yml's
// extra.polyfills, the offline plugin then adds no copy of its own from the network.
;(() => {
  if (location.protocol !== "file:") return

  // A script element in doc for url: resolves once the script has run, rejects if it cannot be loaded.
  const load = (doc, url) =>
    new Promise((resolve, reject) => {
      const script = doc.createElement("script")
      script.onload = () => resolve()
      script.onerror = () => reject(new Error(`cannot load ${url}`))
      script.src = url
      doc.head.appendChild(script)
    })

  class FileWorker extends EventTarget {
    constructor(url) {
      super()
      this.onmessage = null
      this.onerror = null
      const src = new URL(url, document.baseURI).href

      this.frame = document.createElement("iframe")
      this.frame.hidden = true
      this.frame.setAttribute("aria-hidden", "true")
      this.frame.tabIndex = -1
      ;(document.body || document.documentElement).appendChild(this.frame)
      const scope = this.frame.contentWindow
      this.scope = scope
      const doc = scope.document

      // As in a Worker, a relative URL in the script (importScripts' among others) is relative to the
      // script's own URL: the worker's "../lunr" is the theme's assets/javascripts/lunr/
      const base = doc.createElement("base")
      base.href = src
      doc.head.appendChild(base)

      scope.postMessage = (data) => {
        const copy = structuredClone(data) // the page's own objects, as a Worker's message would be
        setTimeout(() => this.emit(new MessageEvent("message", { data: copy })))
      }
      scope.importScripts = (...urls) =>
        urls.reduce((done, each) => done.then(() => load(doc, new URL(each, src).href)), Promise.resolve())
      scope.close = () => this.terminate()
      scope.addEventListener("error", (event) => {
        const { message, filename, lineno, colno, error } = event
        this.emit(new ErrorEvent("error", { message, filename, lineno, colno, error }))
      })

      // The page's messages wait on this: true once the script has run, false if it could not be loaded
      this.started = load(doc, src).then(
        () => true,
        (error) => {
          this.emit(new ErrorEvent("error", { message: error.message, filename: src, error }))
          return false
        },
      )
    }

    postMessage(data) {
      const scope = this.scope
      if (scope === null) return
      const copy = scope.structuredClone(data) // objects of the iframe's own realm (its Array, Object)
      this.started.then((started) => {
        if (!started) return
        setTimeout(() => {
          if (this.scope === scope) scope.dispatchEvent(new scope.MessageEvent("message", { data: copy }))
        })
      })
    }

    terminate() {
      if (this.scope === null) return
      this.frame.remove()
      this.frame = this.scope = null
    }

    // The on<type> handler first, then the listeners added with addEventListener
    emit(event) {
      if (this.scope === null) return
      const handler = this[`on${event.type}`]
      if (typeof handler === "function") handler.call(this, event)
      this.dispatchEvent(event)
    }
  }

  window.Worker = FileWorker
})()
