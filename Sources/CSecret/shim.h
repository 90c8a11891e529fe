/* libsecret and GDBus for TokenVault.
 *
 * The static inline helpers below exist where the C API is variadic
 * (g_variant_new, g_variant_get, g_variant_builder_add) or a macro
 * (G_DBUS_PROXY, G_VARIANT_TYPE), which Swift cannot call. Every symbol is
 * prefixed `tv_`. None of them can prompt: the Secret Service calls that may
 * answer with a prompt (CreateItem, Item.Delete) hand the prompt path back
 * to the caller, which never performs it.
 */
#ifndef TOKENVAULT_CSECRET_SHIM_H
#define TOKENVAULT_CSECRET_SHIM_H

/* secret_service_encode_dbus_secret is in libsecret's "unstable" part. */
#define SECRET_API_SUBJECT_TO_CHANGE 1
#include <libsecret/secret.h>
#include <gio/gio.h>

/* The project's schema: every attribute is a string. Never a secret in one. */
static inline const SecretSchema *tv_item_schema(void) {
    static const SecretSchema schema = {
        "org.tokenvault.Item", SECRET_SCHEMA_NONE,
        {
            {"vault", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"kind", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"provider", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"account", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"name", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"mode", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"expires_at", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"status", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"created", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"updated", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {NULL, 0},
        },
        0, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    };
    return &schema;
}

/* A string → string table, as libsecret takes attributes. */
static inline GHashTable *tv_attributes_new(void) {
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
}

static inline void tv_attributes_set(GHashTable *table, const char *key, const char *value) {
    g_hash_table_replace(table, g_strdup(key), g_strdup(value));
}

static inline const char *tv_attributes_get(GHashTable *table, const char *key) {
    return (const char *)g_hash_table_lookup(table, key);
}

/* Frees a GList of SecretItem from secret_service_search_sync. */
static inline void tv_item_list_free(GList *items) {
    g_list_free_full(items, g_object_unref);
}

/* The object path of a libsecret proxy (SecretItem, SecretCollection, SecretService). */
static inline const char *tv_proxy_path(gpointer proxy) {
    return g_dbus_proxy_get_object_path(G_DBUS_PROXY(proxy));
}

/* The bus connection of a libsecret proxy. */
static inline GDBusConnection *tv_proxy_connection(gpointer proxy) {
    return g_dbus_proxy_get_connection(G_DBUS_PROXY(proxy));
}

static inline void tv_object_unref(gpointer object) { g_object_unref(object); }

/* Secret Service API, Collection.CreateItem(a{sv} properties, (oayays) secret, b replace) → (o item, o prompt).
 * Never replaces (replace = FALSE) and never performs the prompt: a prompt
 * path other than "/" means the collection is locked. `secret` is a floating
 * (oayays) from secret_service_encode_dbus_secret and is consumed. */
static inline gboolean tv_create_item(GDBusConnection *conn, const char *collection, const char *label,
                                      GHashTable *attributes, GVariant *secret, gint timeout_ms,
                                      gchar **item_out, gchar **prompt_out, GError **error) {
    GVariantBuilder attrs;
    g_variant_builder_init(&attrs, G_VARIANT_TYPE("a{ss}"));
    GHashTableIter it;
    gpointer k, v;
    g_hash_table_iter_init(&it, attributes);
    while (g_hash_table_iter_next(&it, &k, &v)) g_variant_builder_add(&attrs, "{ss}", (const char *)k, (const char *)v);
    GVariantBuilder props;
    g_variant_builder_init(&props, G_VARIANT_TYPE("a{sv}"));
    g_variant_builder_add(&props, "{sv}", "org.freedesktop.Secret.Item.Label", g_variant_new_string(label));
    g_variant_builder_add(&props, "{sv}", "org.freedesktop.Secret.Item.Attributes", g_variant_builder_end(&attrs));
    GVariant *ret = g_dbus_connection_call_sync(conn, "org.freedesktop.secrets", collection,
                                                "org.freedesktop.Secret.Collection", "CreateItem",
                                                g_variant_new("(@a{sv}@(oayays)b)", g_variant_builder_end(&props), secret, FALSE),
                                                G_VARIANT_TYPE("(oo)"), G_DBUS_CALL_FLAGS_NO_AUTO_START, timeout_ms, NULL, error);
    if (ret == NULL) return FALSE;
    g_variant_get(ret, "(oo)", item_out, prompt_out);
    g_variant_unref(ret);
    return TRUE;
}

/* Secret Service API, Item.Delete() → (o prompt). The prompt is never performed. */
static inline gboolean tv_delete_item(GDBusConnection *conn, const char *item, gint timeout_ms, gchar **prompt_out, GError **error) {
    GVariant *ret = g_dbus_connection_call_sync(conn, "org.freedesktop.secrets", item, "org.freedesktop.Secret.Item", "Delete",
                                                NULL, G_VARIANT_TYPE("(o)"), G_DBUS_CALL_FLAGS_NO_AUTO_START, timeout_ms, NULL, error);
    if (ret == NULL) return FALSE;
    g_variant_get(ret, "(o)", prompt_out);
    g_variant_unref(ret);
    return TRUE;
}

/* org.freedesktop.DBus.Properties.Get of a boolean property. */
static inline gboolean tv_get_bool_property(GDBusConnection *conn, const char *dest, const char *path, const char *iface,
                                            const char *name, gint timeout_ms, gboolean *out, GError **error) {
    GVariant *ret = g_dbus_connection_call_sync(conn, dest, path, "org.freedesktop.DBus.Properties", "Get",
                                                g_variant_new("(ss)", iface, name), G_VARIANT_TYPE("(v)"),
                                                G_DBUS_CALL_FLAGS_NO_AUTO_START, timeout_ms, NULL, error);
    if (ret == NULL) return FALSE;
    GVariant *inner = NULL;
    g_variant_get(ret, "(v)", &inner);
    g_variant_unref(ret);
    if (!g_variant_is_of_type(inner, G_VARIANT_TYPE_BOOLEAN)) {
        g_variant_unref(inner);
        g_set_error(error, G_DBUS_ERROR, G_DBUS_ERROR_INVALID_SIGNATURE, "property %s.%s is not a boolean", iface, name);
        return FALSE;
    }
    *out = g_variant_get_boolean(inner);
    g_variant_unref(inner);
    return TRUE;
}

/* org.freedesktop.DBus.Properties.Get of a (so) property, such as login1 User.Display; returns the path. */
static inline gboolean tv_get_struct_path_property(GDBusConnection *conn, const char *dest, const char *path, const char *iface,
                                                   const char *name, gint timeout_ms, gchar **out, GError **error) {
    GVariant *ret = g_dbus_connection_call_sync(conn, dest, path, "org.freedesktop.DBus.Properties", "Get",
                                                g_variant_new("(ss)", iface, name), G_VARIANT_TYPE("(v)"),
                                                G_DBUS_CALL_FLAGS_NO_AUTO_START, timeout_ms, NULL, error);
    if (ret == NULL) return FALSE;
    GVariant *inner = NULL;
    g_variant_get(ret, "(v)", &inner);
    g_variant_unref(ret);
    if (!g_variant_is_of_type(inner, G_VARIANT_TYPE("(so)"))) {
        g_variant_unref(inner);
        g_set_error(error, G_DBUS_ERROR, G_DBUS_ERROR_INVALID_SIGNATURE, "property %s.%s is not (so)", iface, name);
        return FALSE;
    }
    g_variant_get(inner, "(so)", NULL, out);
    g_variant_unref(inner);
    return TRUE;
}

/* A method call whose only argument is a string (kind 's') or a uint32 (kind 'u', `number`),
 * or nothing (kind 0), and whose reply is one value of type `reply`: 'o' (path in *path_out)
 * or 'b' (in *bool_out). Auto-start is allowed only when `auto_start` is TRUE. */
static inline gboolean tv_call_simple(GDBusConnection *conn, const char *dest, const char *path, const char *iface,
                                      const char *method, char kind, const char *string, guint32 number, char reply,
                                      gboolean auto_start, gint timeout_ms, gchar **path_out, gboolean *bool_out, GError **error) {
    GVariant *args = NULL;
    if (kind == 's') args = g_variant_new("(s)", string);
    else if (kind == 'u') args = g_variant_new("(u)", number);
    const GVariantType *type = reply == 'o' ? G_VARIANT_TYPE("(o)") : G_VARIANT_TYPE("(b)");
    GVariant *ret = g_dbus_connection_call_sync(conn, dest, path, iface, method, args, type,
                                                auto_start ? G_DBUS_CALL_FLAGS_NONE : G_DBUS_CALL_FLAGS_NO_AUTO_START,
                                                timeout_ms, NULL, error);
    if (ret == NULL) return FALSE;
    if (reply == 'o') g_variant_get(ret, "(o)", path_out);
    else g_variant_get(ret, "(b)", bool_out);
    g_variant_unref(ret);
    return TRUE;
}

/* In the (sa{sv}as) parameters of org.freedesktop.DBus.Properties.PropertiesChanged:
 * 1 or 0 when `name` of `iface` changed to true or false, 2 when it was
 * invalidated (re-read it), -1 when it is not mentioned. */
static inline int tv_properties_changed_bool(GVariant *params, const char *iface, const char *name) {
    if (params == NULL || !g_variant_is_of_type(params, G_VARIANT_TYPE("(sa{sv}as)"))) return -1;
    const gchar *changed_iface = NULL;
    GVariant *changed = NULL;
    const gchar **invalidated = NULL;
    g_variant_get(params, "(&s@a{sv}^a&s)", &changed_iface, &changed, &invalidated);
    int result = -1;
    if (g_strcmp0(changed_iface, iface) == 0) {
        gboolean value;
        if (g_variant_lookup(changed, name, "b", &value)) result = value ? 1 : 0;
        else if (invalidated != NULL && g_strv_contains(invalidated, name)) result = 2;
    }
    g_variant_unref(changed);
    g_free(invalidated);
    return result;
}

/* The boolean of a (b) signal, such as login1 Manager.PrepareForSleep; -1 for another shape. */
static inline int tv_signal_bool(GVariant *params) {
    if (params == NULL || !g_variant_is_of_type(params, G_VARIANT_TYPE("(b)"))) return -1;
    gboolean value;
    g_variant_get(params, "(b)", &value);
    return value ? 1 : 0;
}

#endif
